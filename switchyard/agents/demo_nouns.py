"""The nouns of the demo's tool world: the training lists the bundled model's tool world was built from.

`ToolWorld.build(DEMO_NOUNS, seed=0)` is the world the bundled model was trained on (weather of every city,
documents on every topic), so the agent demo serves the same tool results, city for city. The lists are
`switchyard_training.entities.TRAIN_ENTITIES`' own, frozen here because the runtime never imports training;
tests/training/test_demo_world.py checks they are still equal. Data only: they change when the training lists
do, and are then rewritten from them (the bundled model must be retrained on the new world too).
"""

from __future__ import annotations

from dataclasses import dataclass


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


def _phrases(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.replace("\n", " ").split("|") if item.strip())


@dataclass(frozen=True)
class DemoNouns:
    """The four lists a `ToolWorld` reads (`demo_world.WorldNouns`)."""

    cities: tuple[str, ...]
    topics: tuple[str, ...]
    first_names: tuple[str, ...]
    last_names: tuple[str, ...]


_CITIES = _words("""
Oslo Lisbon Nairobi Denver Lyon Krakow Accra Hanoi Quito Dublin Seville Tbilisi Leeds Turin Cusco Malmo Graz
Tartu Dakar Fukuoka Boise Adelaide Bilbao Lagos Split Utrecht Geneva Austin Tampere Aarhus Nantes Valencia
Wellington Salzburg Ghent Bologna Galway Lima Santiago Seattle Vilnius Ljubljana Palermo Sapporo Goa Zagreb
Reykjavik Tallinn Marseille Naples Florence Uppsala Aachen Leipzig Basel Bern Cardiff Glasgow Bristol
Windhoek Arusha Muscat Doha Varna Plovdiv Cluj Odense Boliva Dorfen Dorlizin Fenkor Fenmel Korfenqu Lifen
Marmelqu Marvamel Meldor Ququ Qutuva Raltrali Senli Trafen Trali Tutra Zinfen Zinlifen Zinququ Felbrem
Glaiklaidrix Vaxbrym Thom Kartelsos Bradrenbroux Bruk Jaxtu Laxstiswel Dretcimquor Hoxchou Braiplor
Carkrurhais Fapainthus Pibim Vurwysful Lotdanko Quywuvon Brysplynplyn Dehaxgi Lanlan Lel Kondol Parbes Maik
Cutha Gutkry Jexchusvi Thiwous Fyl Charwik Rosros Let Vik Bes Stin Cukwek Dasfasbit Honstit Plislili Glykmom
Bromco Plawulmen Lotkircym Drex Nuswir Larshoushou Mul Vorvorman Vixbrokquan Nutxamse Trorglimnux Zyzyzyde
Xexfis Jasjas Caiszai Sosdrex Sox Sitsitsitge Purxykbru Plimquit Krouxi Vaildredre Shatkrelhe Vebroste
Staxthusxak Xatkaito Mek Xou Lyxet Wobramkrit Broux Stytxelyr Tristys Shomshom Fos Maixhalquet Tetplir
Tisjurthy Loulloul Vairvairzi Goul Gous Toussherze Vai Zainbai Gistu Try Ruru Carparkous Britrothex Zyplocy
Warbrainum Drondru Safoshair Glor Wytsom Kafutli Jyxbysvi Listoxcax Zoka Quai Gesdrain Zormous Perzil Shetxo
Xainxain Poditbro Zytnaivis Chyba Glodroul Trilgotrax Bais Thokdrotzul Pym Xouxviglou Rorrorror Sicecha Drer
Kex Rangor Cor Fitrisbrit Mumsaikxou Quaslusu Belthatnam Fulry Mykwenor Chartait Zilvailthyl Taitkrerou
Hixthen Sta Plun Traxcilri Shix Guplecir Plekplek Moxtremtrem Fairarvit Vestabret Stul Vakglyhor Duquapyx
Rirhim Plou Hastam Chet Kokxatwar Xen Waizoxbren Tissoukix Brunca Thaitroktim Xatsoktou Tetthoux Pourpour
Dut Per Rot Poves Pemquir Chir Sha Stout Brompyx Serdesquaik Bytbyt Nukrer Xonroswak Bryxbryx Shushougox
Tham Bak Pitoustil Pla Laxdu Chegelpit Cahomdrex Jumjumkar Sek Nit Dichaimwan Dridrithes Gle Dro Cha Brus
Drerusvor Quukres Wou Firher Gershommix Trarpek Duhimmoun Routroutshu Retkol Thitbrukbruk Thalcem Satrim
Laimydrun Bamshyskrir Loumdaix Stastagem Tolbas Das Gensti Sterrokdrou Trokchu Trilrolhe Thyn Voufixhon
Faischim Drirbalax Joktrunbi Bre Kri Parzagu Brofukthin Hunhun Dre Shakres Plispiksex Jizou Xoustrit Stur
Thamcirsto Mattomtom Cexply Zinit Doukfouci Toudil Bodor Drem Larnor Laklak Nen Quodrotdrot Kokmal
Ramdinthox Four Tata Daittim Braslysdyr Kailren Daimchen Bitfou Stemox Chytqui Stoupemhix Plutquun Nou
Drosfik Shes Pourtrexsti Nisquyrcak Jixjix Trotro Tutshistoux Drushilvai Sen Shisfulsun Teschomzy Zor
Sterzoxbas Dulim Sekve Nissoul Horhi Zozo Boshex Tumti Brylhout Dret Zainpourpour Cixjuxni Shoxrairglix Vim
Nenbrymom Tatata Mardrait Xiktryzir Jekri Shaixgem Cheshux Zybaxbax Raxjai Xokgli Trakper Jamxo Jos
Vylxoutcais Tustus Zaxzai Thi Zivotchet Brak Kix Rencouklyt Reshyl Zadroknar Pigluxles Trultrulkrit Bai
Lingido Shot Thaim Shaspe Chykfou Winlexnor Zinpaixthor Cenbrirxais Tristristhax Derroxai The Solsikdyt
Bryli Shek Chostail Plil Lou Platrik Nornor Kesain Kron Xoukxouk Sorvettis Zir Cholchol Dotdotzok Quimcawo
Fasfa Thimlex Tixta Droxvuvuvu Xirmou Glo Gos Chok Chinchichi Hetze Kruxoxrex Tek Notgik Hixthyl Nene
Shitithir Tobrasti Dok Foxexe Xachamjox Plourvas Vyrquem Xotul Fotplaitcur Cikkreden Saistax Wesdy Mem
Stoquas Glevairvair Coxquilix Baicoun Thoushexher Lekquan Fushox Vailsatzen Gair Shemge Fikplum Serplous Sax
Nasnaszik Shal Trumhouxrek Wasti Gotjo Drilkakkak Jorjorjor Trikrir Kricodre Sixtyr Poukwi Jastyx Zis
Drisdris Trimquinit Jykthiknat Poutplaikkre Dexcharmou Huhatjes Stavekvekvek Tullourglix Plet Xoukmok
Kiplosshil Drait Traifysi Chos Shousshous Mitmitmit Chilemlemlem Gloungloun Rerexam Xytguzait Taiksir
Coumbirthen Kyxfoumwix Dromtrunma Trouthilmos Koko Haimaitha Sir Glochi Glyplamla Plotquirjim Bisplour Sho
Jokhu Tastas Vanvem Stynlix Kihai Cetshox Chaldezou Britkaixti Mot Gla Mejolxyr Plaxybou Jir Tho Bry Kror
Raksheswok Quoumrixquin Choul Darglounkai Tra Pix Furcenquo Kruxzoli Lailailai Kake Mouxglyk Qui Sabret
Zoumshaswun Stapa Brefozu Kouk Xoulailailai Brot Doux Glygly Waistusstus Stadrar Thokhe Thenkrynjo Holvushal
Gelthux Tailzut Teljumjum Glalet Nal Parpli Stempykol Quothyx Plo Stoxstoxstox Trok Gyrgody Vym Lex Mama
Tomwextrar Chisbox Kaimkaim Drotdrotdrot Wottron Gleshail Drar Staxtai Vak Shajys Bethokat Tysthon Krobroun
Woux Hewer Shelbra Quum Pimen Glokchou Tykmur Globrobro Sun Shitshit Tekchycai Xyl Xaistril Chako Wail
Cytvix Vavavalou Jesshaipax Wenxasa Pou Nalkrythym Hytgis Stes Jusstut Thitxour Sonjourpos Rilkemot Pleswix
Zan Krakdut Glakmousjul Mas Ratwi Haxco Pamjais Hikhikza Zik Chetgour Goxkukthem Vynvyn San Loudim Son
Zetzet Cailjil Bremplantrom Zam Hukratrur Trinsharnai Wathirvon Brour Rorche Jyltrumben Krairtan Quylmiglas
Lyplyt Plesglo Xer Glakrorgles Bexouk Thaxquouxcok Stil Chouchou Glervoun Hirhirhir Drousjoxbix Ply Plam
Glai Glestyr Myk Zar Fail Che Relexplos Felatcex Zyde Funquufou Glistekry Tyr Sixorro Fykrashu Xondro
Sulfysfys Glaikglaik Sergoupou Glanoxplais Gexgex Stu Quokthuxbrer Duplosmus Net Fulquecax Tait Shil
Traxglyt Sak Mou Drol Kunma Gal Zanshox Myr Xulke Zoskrencal Zotcyr Samryknin Jisgedak Quetesbran
Trympeshoum Gouxjapor Quychitbrun Henjohos Semjeschyt Sesbraitrik Starzat Hetchiskox Vazos Soutoxdis
Xilbrongla Xil Nununu Dromdre Gix Glatglatvum Vubroum Huretcait Kimherco Plen Fotda Pous Drikkamril Tom
Zulzulzulses Fut Ban Drono Hexbrir Wowohe Ratquaix Jourzu Krelbrobro Paspouknai Getgetgetpo Dixjot
Thixpaiglyn Thykthyk Zushanpel Goukpouchox Trat Lar Rynpok Brurriquil Finplisto Wevar Silisnem Plaistoxut
Glylchekchek Quamdy Neberout Tousdru Bik Krewo Que Rururuli Pinplat Luldaix Bus Sombusquax Xair Thixthix
Mixdailty Thalasrur Plol Jot Plokmixvais Sississis Gymse Kita Haishatroun Thaglebra Shonshon Krokhum
Wolstyhyt Tixquok Quamkur Brukjittyt Glaxstaixhou Pex Kroulfepler Thoutste Wypledex Vetnysfai Houljaxjax
Trunchon Pamsai Shesisi Wywy Shis Bryk Gege Pluk Brurkoukou Wethithithi Stem Moum Sotidryx Mykhe Stedyhai
Glishaitcai Brekbrek Vokraquix Masxosplil Joumfim Chylluxai Tylxailfai Coumte Brounbrici Pol Brirthouxmum
Zum Wakkennet Caca Retxushem Gesbo Stot Drujetly Chalvym Star Gaikloushys Mouxkraxkrax Vilhen Gour Tedrerce
Thunwextoul Datdatstok Delsaim Krom Dolhonbe Quoglouk Chot Dris Thoumpik Dykox Foju Sou Rasje Vestas
Thunzeplax Krymdra Faimmaidox Stybe Dousstosfak Draxglon Tyshusxil Han Kretra Gis Hou Jouvansak Krait
Plalquailstu Xit Drum Fofocho Tru Quatbradas Linlinquit Kun Kaigletbam Pem Vimme Zouxjy Sososo Bamhusjat
Koquammex Xydril Hequul Dokdokdok Fyfyraim Druntisy Bilbokdrer Vus Curcur Stististi Jaiwatstim Rounroun
Kywaix Mihumai Waim Pamdrur Jou Plommysvai Staslaitjir Duhaihal Hanshok Chisti Krairgla Bidrentri Rokke
Ninstechal Rim Fysnexnex Saplikouk Pouvumplai Shote Chous Tair Movu Glirchosglin Xilxilwel Traipaimsta
Kryncai Leshoum Plukdrozus Tainzam Tilfer Zem Krailkar Faksolkok Kaxdour Shat Jimgir Glisbel Quit Krankran
Xisnurka Quimo Pletmix Krykle Xylpultrem Zulchekjix Parlotsto Founfoundex Vakha Firzot Draxstes Tulstel Dryn
Mofusrous Jemhel Krykryta Drim Nisdrotkro Stasta Dotupou Ririri Bonho Shi Xezor Bytreswux Girbrit Litrashym
Shikshikshik Wascutha Halil Thu Dyxpomchok Cikcikcik Woxok Thathapas Bymeplai Lypli Stos Vomvaxvax Jel
Fimfim Thynje Quosthaisply Bosbosboshyl Wupai Jix Bryrbryrbryr Jospikral Krenkrenwes Vengla Thalzotco Plak
Lodre Quutshathis Tamdrain Shislaista Renym Caisret Hai Rodratbain Chuxfox Vesvesves Xel Woukwouk
Shixjikstut Quekra Sagatgatgat Kir Byl Voglous Thykmikhal Temglok Mouwomshai Quykchy Sounquuk Bolshoutgil
Wynel Cetji Lumlum Tam Kraitchamnos Dypail Chelxaimsto Chardri Quem Shedittho Brostus Lous Haischom
Thalhanhan Thikshu Bixchax Fomnunchal Stinrolpou Rouziglox Was Caijut Trydro Jinjin Krokro Hukfel
Taiktaiktaik Gougou Glaitos Koglen Xem Quen Zertrihi Drom Glaglagla Zytbe Raibombom Brakbrosmaix Dim Juke
Quexlaxshat Quoumquotva Plotkimtes Vingligligli Hafelda Zouzou Doxouk Naixthurkem Kroumthul Folzal Shoroum
Hotror Kuxotven Sai Nymunbra Chilkruwur Dor Shocynthoum Wyr Moglanpil Drou Vambra Brudrair Paisais Dogomai
Drehes Stivum Wuthymouk Brugigi Wokwokwok Jait Kes Jen Brunbe Cousmekpla Mon Cem Thoux Quytbys Draxe Fis
Jabatloux Dras Damence Vulvulnir Faixke Thenthenzyn Thininar Markrolmok Rur Virxel Troustanti Gorstour Zyk
Zolxyk Fithastrax Chaisbou Drymache Zestounplan Mir Quouldriwyk Mitplaisjax Taitdri Vouchex Xek Chijeje Krol
Milquailquis Quive Texmazus Brinxem Koukoukou Stitquainain Fout Hys Stistirshir Zour Non Samylam Thenthen
Stamri Bikstek Roquit Kregliglam Dretquiqua Xerxer Zaxzaxzax Shemkailquat Krour Quystijex Vuk Xyn Mok Milro
Nysbitfa Jimjimjim Fir Maxmax Sisirou Jaizorzor Staitli Vouxju Bres Pisbosni Stirjaitro Kuxouglur
Glequylglik Dyngys Sterwebrai Kokokoshai Roxdos Candawi Cascastrix Quanglat Talumtran Lok Brelbrel Zidymwi
Glelmik Zezeze Plafis Chabrenlys Trutru Comsou Chol Glontyl Kok Pikryk Purplyn Dyxdek Bandrur Gavi Leklom
Gucoscos Quento Maix Cir Nagigi Krim Kredikais Dit Quongeskrouk Xolsairrai Stoxpor Trek Glyglybak Nuljenpail
Chaix Texkres Gingin Kus Sitvepit Shainan Jyn Lynvous Pair Lis Hulshen Muthok Traskamik Dainshusshus
Roshailgou Jilstaix Trytplak Shoudifaix Trintrohot Komdraxshem Vaxvax Shain Vasvaivai Jyx Rouvurcen Glou
Kemquashok Wisso Drukdruk Zitplafam Plouhalcam Fait Tiktikstex Vethemdri Lan Gokplu Glirthistre Bek
Boxwerwel Tisdoudou Riporvek Mimimixyx Batrim Gixgixcaix Chaitram Tutkimkrai Moukre Britholjoul Shoxmoum
Sirdru Krykrykry Bor Rimwaibros Latlat Shox Thunpoucin Railbedal Kouzor Gam Naichos Fofoplou Xapolpolpol
Rutlailwouk Kostir Plinshitdrin Jun Mymy Krymzo Brim Temgi Xik Kilcitrik Remxot Vikviktir Zomtrimshox Fatix
Badrahouk Gaxdrainos Rostelsir Kritroum Kat Toubam Taglox Hamhamham Gislosquo Kryt Krabattin Reknemles
Kilamhyx Pleple Ninkremkrem Mizyltot Stitbrairxek Pykcit Mous Tutu Zufe Gogo Hakroukkrouk Fone Kritkritkrit
Stulixbu Brimrounme Kerbekhoun Bulthukdris Cou Nainquetom Tybrairhain Lylcaksux Kopum Theglin Cis Vofo Byr
Draxcos Krikne Kronquare Fylcofal Xencout Trartrartrar Varhosthak Doshofan Jinnar Drak Gloutfo Vounnosjo
Quarjak Coxpoutpout Jouskourlo Glomwi Bri Brouxkres Bos Jotjot Nabron Til Lattonlis Sain Zalcytfou Krinkrin
Stir Chinbas Plasijex Timcougos Krassteje Tharym Hilrouxni Dywom Rolpumstis Toutrabut Dos Bradyrbrex
Brarbrar Jaibosglai Koglis Thuwostek Cen Thik Derdam Woglouk Mairwyntit Sevy Xuxu Movam Jitanra Joxjoxdun
Zit Sidi Quusquus Shax Wukain Plaipys Jirvokjit Horoukcho Jamhi Glouglouglou Draxglaitmes Brol Lax Thezin
Zemrohex Chaxtulgot Glusshi Pesixxe Nekbrer Zykzykzykry Wet Thegaimthun Pli Lyrglimglim Triltriltril
Jeljeljelho Drilbrakra Sixzizi Birmos Daitnoux Glin Rem Trokplos Woukchak Ges Chi Shemshunge Plasvinbrix
Maikmaik Terkyksa Tishyx Chax Cil Soxploussho Glenglen Dour Fygoulshem Pin Zixothou Quu Hexsarves Temkokken
Shem Xilan Quitjiru Thipelkoux Lesglamplat Gomdrar Bol Glatrais Quonfet Detlait Welfaslen Paretbar Sespi
Ricol Kramoxbrex Kroufo Buxfatplik Jinwo Bait Kit Jal Staswoux Baidewan Chaitrerfai Thum Zolacour Dek Plel
Vydimyn Kre Bepexfo Tritstoldaix Konenxe Julbrut Xuxxun Tattom Moucak Trixshetfi Roxfencuk Kainbe Lyllotplis
Gletou Brokar Jin Brous Lit Fix Pouhaizoux Zikpek Plaitvaikne Glisglisglis Chixcair Plurplokglik Trumoux
Zout Telbrai Sum Kislex Tipamstox Potquam Trysam Gywak Chamxar Tartarsol Nanpoukro Renxetkyr Gomho
Kicolkrail Vutgloune Zeze Glaihelthar Draitquok Jotwal Lamcesloul Shenwit Semquo Trout Mismaigo Hilhilhil
Ploumryryry Saixwamkre Rormorje Xutys Pleshukdrem Thymthym Nes Thouk Kradykma Zomchi Lil Trai Mashashasha
Hindo Rin Kamtrit Syn Lainshyt Xexil Ploktincon Gathyl Malkraitwe Mompla Thynchit Thithys Kritgisque Dus
Noultroudi Lisjal Finglolthen Trocoun Papalen Tro Xasxas Raiskolzi Chur Bipis Fokcetri Gomtrexlu Tus
Dramnixstoum Nyfypuk Laxthou Tynmin Staihotret Gline Hadadada Podi Coxhes Chouthym Vakpakkren Maschys
Krenzyplam Broubrou Kraiktyty Maimai Mythak Shersherger Hesande Lakbik Far Foustratkai Voudir Sheklimfer
Pymbai Cesquoskex Japlattok Chairvules Huntruldret Takkrurlal Shonbom Brobro Beden Chaxno Quotix Krekfu
Kurkreljait Kaka Troude Kamxe Quewo Shoxramwol Chanmusmus Ver Memen Glaisfanquur Gar Pir Broumbroum
Tryxstumquou Box Chuvonku Xilplakhak Nylem Kronholhol Xouxouhel Krutxel Hulcetit Braislatshex Newamwam
Glyrhaimhaim Zaizaibil Xous Popas Dixvos Kequoum Bris Mourdraxplam Manglessous Daimglil Kramsakjix
Gylchilquou Jis Cairtimton Lekthy Glodra Failfailfail Bra Tabrem Vemlon Gun Combe Rybris Shikgairex Quol
Glaquaix Plaizekvon
""")
"""Every city of the weather table, in the table's order (a city's weather follows from its place)."""

_TOPICS = _phrases("""
vacation policy|expense reports|remote work|password rotation|laptop refunds|travel booking|onboarding
checklist|code review guidelines|on-call rotation|meeting rooms|health insurance|training budget|equipment
returns|visitor access|data retention|bike storage|holiday calendar|performance reviews|wifi access|desk
booking|shipping returns|mentoring program|recycling rules|coffee machine|badge replacement|wutamglos
rules|brizotplum schedule|risshemdral checklist|sturlukbun checklist|suk checklist|maktroumo allowance|sit
requests|loquou program|xyxplotche rules|shepiskra allowance|pat requests|birzashi checklist|jourxouxkox
access|thisply requests|cakvoutnil policy|jai rules|sai allowance|sisrin allowance|shok policy|woutbrenal
schedule|zesxu process|chudroux checklist|xoun program|cait guide|traiktrikas process|laicaik rules|brorve
allowance|pluttra rules|jyk policy|shukstem program|que allowance|thyl access|quitvili checklist|natxe
access|quan schedule|retbrek checklist|shen access|gattremlu requests|choum guide|dris schedule|sirdroukkai
guide|sohourbol schedule|zothy requests|kratxitglo schedule|nylmaishet checklist|woulcal rules|ryltril
access|vamvamxol guide|krychi rules|styx allowance|san policy|kosquail program|won program|woux requests|nak
requests|krik guide|tummus process|plat program|lunje schedule|glelthyglai program|kre rules|stalmuty
process|woxtra allowance|quot guide|trovikno checklist|moukri checklist|dyxzat policy|vek allowance|trilpe
checklist|zupyr schedule|thai schedule|bos allowance|tridrun program|rol requests|tan allowance|sorlal
allowance|choshexfit schedule|fesgainpar rules|drenti program|zasquai allowance|draimlil guide|shexsti
process|sot requests|memxolkra guide|shik checklist|thadifyn process|mol process|zique guide|zukon
guide|quovainshar checklist|quanontyr program|worlalte access|lum rules|mou program|helbri rules|courbrolpox
access|mam program|thous process|fagil rules|cimerquel schedule|rytre checklist|coubralha rules|gutfat
program|quintabrel requests|haxpa requests|stixtryt checklist|gour program|toushix schedule|fatkourouk
process|drelzu allowance|drechon allowance|che schedule|brait allowance|janvukrux checklist|bakhur
allowance|ston schedule|xeskroszar process|kaixait access|ves allowance|shelbousto schedule|gelplar
schedule|cha policy|gloxglam access|quom schedule|zou policy|zaikcak policy|banvas checklist|chysgleljin
process|shatar process|krox process|trot program|delchopon guide|chipasdri checklist|taszyndou
policy|pemouge program|brenxailquo program|thuszirva requests|coutkro checklist|lilstoudrit
schedule|regitstain access|bodroutris rules|haikchon requests|jour access|gotganfim requests|qua
guide|chykjain guide|jer process|fikdaitxouk rules|trousglolgal schedule|zenouqua rules|ploxpleslouk
process|jexlel allowance|glos allowance|baldrixton allowance|kys requests|raikchaidrai guide|maxmel
program|tas requests|sis schedule|bex process|tromrelthoul access|dakdim process|thixhyri checklist|terkagyn
guide|faivom guide|stopoutrel schedule|plek guide|shocoplai schedule|maplirbol allowance|boje
policy|molzurkrot allowance|goulgeljos checklist|burny access|brous guide|sirpumsas program|wal
allowance|gaim allowance|porchat allowance|raquanin access|van rules|thicin guide|vora requests|nextot
schedule|houkdabot rules|watri guide|bai rules|glusom checklist|bronbrou schedule|cetthoxxes program|dibrer
program|plyxsha guide|thouttos access|xonfesloum requests|xen allowance|shomga process|medanjouk
rules|lanbror access|mixlavel process|compal process|xyxhestet policy|zoursatplol program|mik process|det
policy|loukkrat rules|chikrowat rules|shekru allowance|gerglekraix program|xasnoglax allowance|vosxun
schedule|pirvilwi process|xissok access|gaquouplun guide|rai allowance|fintonzour checklist|disran
process|chysrux access|vatjetcal guide|nanglir policy|quaslos guide|stoutraxwil process|xodra program|dre
rules|cincutbor checklist|potihir allowance|vetvaixsaim access|han checklist|chainfoshax allowance|drain
process|sheplefit access|tyxrix guide|tres rules|xoulbrem rules|lishaiglux requests|dramgutrin
rules|chilshothy requests|faik rules|krus policy|sentrai process|drun checklist|stet schedule|dairkatpit
access|zytylshait requests|zerzik process|gloumdewel schedule|shoplou rules|poulfe guide|jyksar
process|zirbripout process|tik requests|plofy access|plas guide|xolkrirquur allowance|plelstai checklist|jil
requests|maixkre guide|choultra rules|kosdraxdram allowance|halkrom policy|tex rules|dinnounfek rules|dil
access|chymshit program|thicus requests|dai policy|haisrytrek access|nirrousfot rules|nun rules|plijou
policy|zespaisquox guide|wet checklist|tukrekka allowance|glo schedule|glaborthos requests|quyxbax
schedule|quelmi schedule|theporcox process|tronputli process|tralihis schedule|brurvoutdair
allowance|riforsho process|ponfunshas process|thoxgai program|zoukvat policy|jixlo allowance|vair
guide|dranxel rules|drykgou program|dacix process|nimtrelglin process|chifutle program|lansix
requests|moshortho process|jekkru process|krin requests|sumilas schedule|quimquoul policy|thotcet
requests|pirmoxra allowance|zyvu program|stitglik program|
""")
"""Document topics, in the document store's order."""

_FIRST_NAMES = _words("""
Maria James Aisha Olga Pedro Fatima Priya Kenji Amara Ingrid Tomasz Leila Sofia Hiroshi Nadia Yusuf Elena
Mateo Bjorn Mei Kwame Arjun Hana Emil Tariq Clara Dmitri Kofi Greta Samir Jonas Keiko Felix Marco Freya Ravi
Hugo Nia Anton Omar Vera Jamal Nils Sana Pablo Viktor Imani Bruno Malik Astrid Ivan Rohan Jana Theo Ada
Farid Mila Zainab Lukas Esme Noor Caleb Yara Kaia Idris Lotte Anya Moritz Dalia Trouda Stous Fas Bram
Demthabok Krourfy Tidrourjai Ploxkox Birchatnix Sherglux Sukcylbre Stythilquy Xai Stokrithom Tyntyntrut
Nounai Mantrer Dait Dresordras Kostisvo Quosquoshim Jaikquet Thenwin Sham Draxhosmex Plouxxoquax Plyxjo
Lullulgek Hunsikdru Drimgex Zoun Herpudrai Krouk Chur Somcosris Thour Bou Quoukchai Pikfocha Bim Storypa
Ferzen Pestrek Xemsounmai Bait Lexbrin Stouthurbi Coukchomut Remlehak Chai Rabitshyx Tremtre Hin Pampladix
Kergirras Quexnas Habrirmi Kamwyn Plynplynplyn The Chinshul Duso Plexekro Bysmail Plotranshek Xomvaxbran
Mimfamnim Viswy Plaistym Wopapa Stubrostim Chegetquan Hes Zouk Dar Plesstel Deldelglal Rux Gekstaizal
Tokstun Dretglouktro Kretzepi Soche Wiplotkis Ten Try Bre Saitrifain Thyr Bexzas Zaxrax Fuk Witkukzul Vek
Glemtamshe Drildrapos Pyn Doum Shais Krospaix Bro Glaktollex Waim Vaikpajoun Shox Quouxok Lesles Shaityr
Jantaitai Pewaluk Broxbroxpem Laxlax Ple Drainzir Drunqui Balaim Hyx Shykgex Risvyl Kymthim Kiltim Ran Hel
Shalkraidel Wexwexstat Thuthu Thaixdrak Bron Ploucoxtri Glon Bakfaitbro Hahapax Kregoux Tralpir Moksam
Hymfiwoul Tou Shigocon Pilxes Senfy Basgaplait Mapi Bot Quelse Quoquoquo Del Zoxdicair Zitmex Xemdeshi
Wytriwas Cytcytcyttik Glais Chu Rikpo Chax Baitu Nikryx Shimomhox Shedok Shat Kostakir Titmothe Brouzor
Vecontak Bykpelky Jon Starbraisco Derbrame Hailoquy Mai Kilvaipos Braimdrives Besterplil Fotglypa Lysshai
Filfilfil Glochoutxai Zekful Zodrelha Lebril Then Murbrous Futdruk Noknoknok Planplytnyk Goudrugem Jaithyl
Testes Hultrex Salmoumoumou Sit Qui Bryn Pensoudres Myjiknex Tartar Tokre Gos Corquilkrut Glimglim
Plaltalsto Kromkrommais Plildusfel Tra Trounbikbry Brybryham Quikpluxbuk Drudashout Goulwotnu Dranbres
Daikrakbrel Drardis Drout Thoxoul Kurxalgik Silzikchai Drislarlar Zelplourthum Findidan Dakgloltem Laim
Zelvichol Corohy Koslugler Thix Zainmyn Zam Poulques Kathogloul Shurze Punolnol Chos Gutdostra Viltron
Caikloumgyr Hisxy Sekchas Kroulelfail Porpor Nirsta Paitroul Chadre Rokrokxut Xelxel Shakshak Trodroum
Zestet Stististibro Pofomri Thoxthi Quo Droxplekplek Larxas Zuklaidrou Gul Loglanglal Tok Voplaix Debris
Xattrol Wamshospil Tril Har Doumdoumdoum Quoquo Mommom Hoti Guxxi Droumdroum Pomhouk Drutkrijuk Nitthi
Sakstuple Samconjas Gougougou Brembo Selcoco Berstos Gys Charzy Delthin Waitatret Shailkek Plixplix
Kelshardrux Plokrihe Glicustim Krekre Makthos Bupukrais Wirtin Vamlum Bra Casnik Leklek Lai Hol Chiltail
Poxpox Xirgam Sou Bosulsul Glalubral Daidys Shex Gloljix Pli Brassto Sheshe Shugoux Fiwu Paiku Hoxkrai
Gitsymtit Sho Rex Domshul Jilxakchik Plirfojem Cicitu Zozo Glakmix Gatsymcox Zok Krynburex Kin Rai
Toutoutoujit Zaxcotthol Wukshecok Rouxlisjur Loxmair Ratratrat Kexlyxche Xynvitpoun Jaru Plis Roja Jykthin
Lous Boxgirex Xamdrourer Zaixnoun Wimmuxcail Krar Trasstu Vebroux Thajaimbaik Xudoxdri Noxtek Jat Founfoun
Kektrotdou Cysfemchyn Kriveksoul Datun Krel Quisthos Drosfitshar Xaik Ruchou Drakdrak Cou Rusruskru Nemhan
Pismouthal Wouwou Quilna Stais Sotjerxi Glinbrixxa Thoxstu Holodek Brelmimpout Shaiko Bryx Nanor Vovovo Tix
Chaikdoul Levi Barbar Tirta Jys Jejoszyn Saitretquel Setxextrat Jizuxpli Kren Coum Thekpet Thirwirtek
Quequix Vatvatvat Ves Jomstotin Vorquaixyn Gairlafik Lordal Kraikfin Shitsoumla Shihainxys Cas Plenakxoum
Glarhes Brusim Quouci Toltoltol Mermorquot Venshaxtra Thontheskral Jambomtos Kem Polym Dri Kai Glix
Derchynjan Jaimsa Kosnek Chassywu Kraixbreplex Tratfut Risquek Fexrikbem Shixbebe Tilholtros Quoukbre Fixfix
Fomou Krundet Zassholvo Jawoukly Quiqui Takplexout Hencomcomcom Quesdada Deryksai Trymawon Chotchot
Dordordorvi Titgan Moboun Cemcemsim Stotfikbo Xelvous Zywu Baigais Dou Che Madre Drodaihu Thyl Jonchoumplyl
Sai Cychyrlon Plolgildrou Sejinchom Trotroton Plu Mar Krykshais Glimvaik Glarxai Pakpakpaktek Krat Tral
Branthesjis Chisdrexhar Mas Pluk Mairdoulvou Hehehelyk Tryx Shouglepoum Quaiste Xuxu Vymkaikbain Gerpuk
Soulik Hairlyxgli Glekglek Plidoumkel Vixsy Berberbyt Plenon Hogloubait Kisjet Hemdrelglax Ryljairco
Golgolgol Ninini Nalhoncas Gekstymget Gifar Cim Gaiksympe Churbryn Jar Nouldyl Kouskrus Fucher Brit
Wokgloxgai Bais Krokro Litre Quarchakou Bru Larno Trourwutnys Plolis Sheshonshon Hainhainhain Gakgak
Braitrir Rosstik Poltrukpi Wawagat Forzyt Plo Moxbritdron Quoxbrorthon Zulzulgla Biburhos Hybro Sturstol
Brerouhi Sextrit Thaittror Trok Kramut Bouvetim Ploulut Xoungaijim Drit Paixdrala Mym Ples Plirjou Vytca
Trur Studus Mawoutple Fascyrat Rasshesxu Lorlorlor Broulne Krim Semkrouxi Quujyr Chocho Hitshu Vai Krakravot
Xalvikrain Zamoxou Xiri Quulquul Glenlair Glaiwixpli Haxlai Thanquax Lekim Sterhykrox Bryxgairple Glul
Xairplu Sovimcal Torfasje Jok Poudotshe Koux Treltreltrel Janrul Hatxainxi Tubuhan Molfo Thor Gislaihil
Chingix Gin Bol Quen Foumzobex Plaxmai Drumthaidas Maiplis Soshas Thar Myl Renren Vunxos Pegomgom Krotkrot
Tarfoukdres Zalou Pletylgla Plax Mit Xairxair Plokchudryt Jyk Tequorkru Drerbourlot Trai Glinhexquom
Lasdomdaik Pouplakpim Gon Trolbratquo Zorhoxhom Pluplagoun Nixquaster Noul Pux Drarhusdo Jail Bet Zom Shon
Jin Rokwahax Foufou Tre Hiry Brikra Jak Bak Luk Houtnet Gix Plik Nyrbi Stida Stemvokbrat Zysquon Thex
Shakvik Ganchik Shodou Pysrin Vyttul Gux Thimbro Wex Zezeze Jol Mimdrer Vukrekrum Kentamkry Genstait Siges
Drykchair Tosmikstil Welwelqui Cabronbyx Nat Showikrour Quyxquaxquax Queque Gum Brilpotxes Lurshasga
Rolrunnem Vimtrenglou Kon Brarbrar Jepes Doglotbait Qualstirvom Xoxamfil Zedrouxgle Breketglar Lililo
Barshaxlin Quimfor Ror Draxten Vux Woutzam Gla Shishi Kraiciston Men Taglithox Pitzoumzoum Stousrairai Tel
Wir Xainfaksas Bububu Myr Let Botbot Joxlikdro Zoxpoukma Fogli Trertrak Zostesja Thou Wynkrepel Dentral
Lefutgi Conconro Qualjastit Rouktho Sta Jomze Rinryplik Plylluter Cai Plibrindux Nerkrir Houkcepli Vergi
Jankrexhyl Bour Stoulhotquou Poulnaixquol Fixku Que Glunsamfe Drymvut Poxo Vershi Kotchoum Kek Kel Jetheva
Ralsemshox Morkytra Vouras Rox Gur Cem Sha Bildres Plyrcy Bedos Wany Gen Boumgacyt Datititi Chalkomza
Glolerwa Lon Krypyrki Krouxlodo Zaitkirkir Vyr Tetetequour Glaitron Fal Hokquikgix Fenfen Witlolo Vabroumtry
Zougourply Bramjutjut Stox Stumjout Xivot Nofimou Jimfamdru Wouktra Xolbot Bounfordrout Stokoulex Drurgla
Cysquol Gatnysnys Katvesmik Rachytrin Pet Droze Brutbrox Thimxikxai Fes Doulbror Bynchytwyk Tukchin
Jeljelkel Stunstun Stet Glous Krour Jajajahox Durcokge Truttrot Stai Himbi Lurlisza Chox Mos Quouk Nixbryn
Glonglon Lenlenlenjek Kum Forsho Fitrur Glain Kekkek Goljudu Stinsaca Ces Quosgles Kat Cylcylthoum Gaivom
Quixquix Korkor Drexkrol Krenhyxhyx Shitronbroun Tremmim Hour Tetbru Quar Koknik Chik Fam Plijon Fot
Jourjourjour Brahen Deplanfoum Drehemle Litlitlitpon Hamsakmes Pimrikrour Cashelgle Vor Lour Maxoxo Xilket
Sty Nim Niwaxji Lil Drethurpo Tai Hihihi Rer Hetma Waitpli Nenplat Bruxshylshyl Drur Quequo Quim
Mounmounmoun Jagakga Glar Textextex Vaimquais Gyn Quysxaxvou Palshoulen Pemkrimkrim Papaho Vasvas Tox Gaijam
Trom Poutkroum Shix Fit Trenous Kret Pades Vosax Brutsaikgys Zoka Hai Trourchycal Thailainout Sossossos
Drais Bar Stikrastai Vaimglasa Maba Trylvok Chofir Tokpaitwam Stum Thi Sashailsto Giskyn Nin Stiwenchos Rofa
Bril Pomel Wainwain Krijoum Kro Staik Cashofe Tis Sakre Zox Drour Zatnaix Gem Stul Krilxa Niza Brik Fat
Quelil Paijusglou Doulbo Cutglaichir Glysoshik Shes Desnaitkrus Por Koko Rir Sibram Rairpluchex Nokquukdai
Broulbrashes Glokkro Barkros Rirpuxpli Tutuxit Glatrit Rakbairkrix Sakfai Krou Kan Cottostostos Byzoxgle
Lusplimdar Jukusous Nen Dajyschi Til Ste Tata Lirquoukhin Brim Fai Shytchokhy Pometstaim Glunsholmu
Stesteste Rouroumaik Thimbaihis Dakkril Resnair Poussotchuk Tris Rel Sainbot Belbryt Stoux Ritritritsti
Gixgix Dreljyk Xistrextha Gounsi Kreglin Jiljiljil Plonroldex Quorquecait Quittilglail Quix Rotrou Kridram
Melkewe Jenjenjen Saiswaiwai Vastikek Styxvo Gegege Tretbrosbros Mepe Pakhu Cythesjur Stendupik Val
Trupliktha Vihithithit Zazaza Xinquompux Chopitnen Stanpe Cixcix Caimax Steglaito Brodantil Chim Stinpil
Thinfaxfax Staiky Remlourlour Wystu Xin Vemfoxdrer Kun Krit Trouspemlout Zourchacha Quode Brytbrytzem
Bahynshou Setkreklis Cohorbra Dour Bailno Wentreskyl Quout Shaxplis Coxcoxvon Patpatpatdem Jetcamshuk
Totcaca Krol Laget Gle Trivem Quempai Poukix Driktat Salail Shasha Pypypy Brisjyk Wolzikdryt Hailwovi
Stististi Bitbit Jivin Mafoux Drok Hancaikplu Plyrty Gargar Tryglok Daimsozyl Patthis Tyxtyxquas Plelplel
Cexdran Girgir Kralho Krashes Chytnaim Kykro Glas Shenail Ribrel Thiglas Chairkatok Wabroul Dyxdruk Xaim
Paipai Wuksti Kilchizout Plitvixwur Hoho Sishut Tuxgepla Junsasasa Gaitgait Doul Shi Zoupyl Brukdaimpes
Trytry Shoukcyl Drexquopot Vohoux Cotrumno Lelelethuk Jaisjet Bulal Dux His Trisonjes Stouthergux Tigox
Poune Homul Pourgletri Rolbrou Daitpischul Shashoukdra Zot Xubryn Rymbuhout Stimtostra Vox Moukcoukshox
Gutkre Nichamgum Xethaxstak Drot Voustekhim Cumcumcumjim Troshe Hithimzin Nasja Raisstim Vakkrikny Stithi
Gas Krexkrexbul Plosplytdur Truwitwit Glol Trenzoncil Laldry Mimijis Bul Fairkrethe Founsinto Kymbri Keshix
Chymxyze Nyby Plercoco Stastafux Kithipin Drouhaismo Trol Thomokmok Tixtrikrek Pinkurval Gloum Zouzouzou
Zajet Pykquym Chothi Bromconstai Vokshik Thouhinkri Memese Bret Lallal Bekkouwo Hakpoutwer Chywatwat Pogi
Gour Derjimo Kit Mailgu Kros Poum Drouk Thousdre Lumglomwout Xouxhe Quys Dom Dum Stanchance Qua Nana
Hailhail Xumlom Laijolur Rul Gox Voxxosmek Quaqua Quet Hamnankros Zozospla Plok Xou Brutdoum Galwaingloum
Brykgledre Cebel Taktur Kir Das Mimdomxoun Jaixjaix Tessem Xal Quax Chix Nailven Trertrershok Lairfais
Stakfershin Kamshukshuk Raigys Nexwywywy Krynchaisvai Zeha Tulcha Betpaisfou Heszaly Givamplom Natcho
Lakmatsait Fofo Thas Bivyx Shum Drixwidrik Vachat Vimbrorthul Rektais Plin Quugebrek Gakthol Stonqua
Maincholstou Deslikman Rexquo Drairhik Glixkro Wox Wammou Cot Hetthou Vava Hous Noglydam Zuxzuxzuxquo
Tretbrar Vovobym Cekelpla Stanzardrul Trikkor Pupugax Dran Sourvoxys Stixfunlon Humha Fyt Noutbrolhaix
Cisrou Krarsta Sefa Fokhokat Falkor Hixzat Ploksukes Cal Tar Zorwais Rit Jebrakry Kri Goukakra Bax Trildol
Quux Plukmat Busso Glolpli Brix Bri Xox Glakshiglos Dekdyshai Tourfe Bous Vaikkesther Jiswikfar Vaxtroktar
Quuxquuxbry Chys Kaka Rimrim Brou Thicousfai Shoukvikmik Sirhe Faimfaim Xyvaix Traixkriwi Vounglomil Xirox
Steltru Honhon Bronbron Stom Qualwotnix Dousxa Roukcoustai Soscol Traik Chudal Glenpace Zoktrasjar Ploplo
Pourfalster Zyr Bral Fulful Pim Doukhour Paslidal Nylhounquaix Xomai Nekos Stisak Quamais Juloukpor
Faixhisglet Resplastoux Pyt Rekglygly Quuwa Fesrai Ralver Bemgo Bikyl Nus Plolloume Vovatbron Lan Hivuk Mixe
Balastrem Xit Plen Drinvi Tatplon Mou Tritraitrai Thowex Vaildrolvur Watwat Hoxtraikrot Quousbol Wanstaxkra
Rumchon Doufaixsy Gloglo Zat Vogon Manshom Krixhysca Wiksil Targaicis Venmil Dram Xolxol Momo Kinfounam Ram
Cesax Toubon Nuxfixlil Zouthy Bamxox Shaimtek Set Glarxou Fyrnairrot Mak Dim Piken Thoun Glak Stour Styrvyr
Dadada Gor Quou Tonta Kexcos Moun Dral Quorquor Shelshellum Pin Brar Vesxanque Furrocu Glekfainlix Jijicy
Dyljuknin Vifak Civaix Zalkrirair Lolbraplom Gai Kyshail Trem Shor Glotbus Cek Mytxochir Gleksa Namnamdo
Chektamqua Chikpem Shir Wonfousi Tasoglum Krurkrurdet Gel Nex Tyn Vaixjurlor Balxouro Tus Woxmen Tat
Litrimtril Temloumplot Zaxdrait Stys Daldal Brouk Stoutxanso Plimguxquo Gajot Ton Pakrar Stebrutbram Thon
Juncou Dok Boumyk Xax Dreschanoun Zalglipa Mesmil Trilmi Rokkunplat Mot Lix Kroxouxpas Hem Zykplal
Quotquotcem Rogodrex Plonefys Drerfalso Krairixous Woxroro Glarstel Tutja Tristris Chaxre Poxjebrik Noun
Nouszi Cherchercher Glur Drisce Gubralquain Brenbrenjam Hekqui Xylxyl Souxchemkrai Kresjik Thoutoux Somwai
Bren Botploultre Biplexo Gliglu Trolxotho Wimjaimce Krartou Furgu Papapakex Plyx Bredoxek Mer Xumquanquen
Quaittaixzox Bai Pitdi Bes Thilquikpler Fom Betqua Gugu Thermul Posdelquim Tynshoux Citosli Drounnox Shai
Tyrkukuku Chem Weples Nomshair Doudousa Plitplitplit Krizeltham Wiquam
""")
"""First names the documents' contacts are drawn from."""

_LAST_NAMES = _words("""
Garcia Okafor Nakamura Silva Jensen Haddad Mendes Tanaka Osei Lindqvist Rossi Moreau Fischer Santos Ivanova
Larsen Costa Yilmaz Dubois Ahmed Becker Sato Nilsen Mensah Varga Romano Weber Park Schmidt Nowak Bianchi
Hughes Adeyemi Lindgren Murphy Kim Fernandes Dahl Abara Rahman Suzuki Brennan Halvorsen Moretti Keller Lopez
Chandra Berg Pereira Sorensen Oyelaran Kaplan Duarte Holm Brik Catsoklok Drimbri Gaxgoglain Kraidit Kes
Choul Cyxdojo Glyr Fafa Thy Kra Tolilfin Sasxixixi Styljo Stulfam Nirjaimquo Korkor Jolzonzon Boushytcom
Glinglin Glolglolglol Quoukdri Quil Punstol Cumthi Braisha Saiplupluplu Xoulbru Xytengour Kairol Fonmotkras
Styl Hushaijal Brixbin Gletroukron Zour Poupoupou Stit Wetthax Glenil Zasimhoun Wiwi Vinvin Fainthan Voun
Tritcanstaim Ste Benthain Shoxbrem Trisal Vezo Veton Sharsolplyt Plax Sounfa Nennennen Brix Glardu Vinbouvi
Thikzak Sesvix Thosjijiji Brel Glun Tramoschet Vyrcegen Wit Hokhai Glitchor Fotstai Maixnex Cot Trar Quitxit
Chi Brahox Mixlis Quainokple Chixrexthi Herglaiha Gaklusgin Brombra Dol Mar Nicem Xumxum Touplesgli Batbat
Chechegan Stytdouxzir Baszam Zatxokrai Poquor Momo Hurkil Kraikraiqual Drim Lyshaihaihai Brin Ninini
Plamplam Trex Faikkor Plem Quom Brebre Jox Fimnouhas Quouk Gigi Stoncen Krorba Shisglubu Krosxar Nyxkil Kret
Thoumememe Shoxstas Staixem Dredrene Relros Kigix Xiquomru Nakkem Luxnom Chos Glinkroutjox Zorkreplan
Suxpaive Traitrai Trukglix Tha Pymogais Thotho Plan Nukglom Tikzotzen Hyxat Zansesdi Kailbekrur Tho
Quamousbit Pedruhel Chyguvan Plabait Xenshait Chot Tymi Kaitkak Fasjimjil Komjoljoljol Lolo Bex Tretretrefik
Shel Rilril Droboquon Lunhel Honfaim Diswatdroul Gai Pinkonjek Mishoumtaik Vaxfonkoux Trubipit Fot Stis
Glurdalza Gus Waix Geher Datrel Zaxjenrat Besin Kroglekrok Dem Brelchyl Chixxem Tru Zom Shynbyx Trysquek Ken
Quinorfai Choucidor Tryxtryx Xexely Menen Tomgaipaix Gothaimi Fiquet Krershaikmin Plorquyfur Womwalsi
Trekgledro Patzou Corurrur Xekxekxek Govix Kyrkyrkyr Nixglom Xaiszete Kon Suvylna Quikfi Quuxhollit Quik
Braxpykcym Drakjetjet Trektunbol Xyrpoun Tikbak Tovytwous Chamkuqua Brex Stixdrechar Plyroukro Lellel Nym
Masdrulho Zotcycy Loxnalcuk Plysby Xylfytrex Gikes Draxdraxdait Cyrxaxva Stailhomdra Xel Kryt Pyssai
Plyxxixplon Sinsinsho Wai Nepil Dadryk Drouxplem Motglenkrout Trotro Lebrigi Daldal Pli Fitwa Thoksho
Faisvour Plo Doukdouk Shytguches Zakpumchom Plex Krolchatvais Lai Zaimshox Dralthax Chaxquas Chonaltrar Nai
Shu Kakaka Wemtoukgla Dri Glai Quin Troxtrox Wistrutrai Kelkoukci Cimcimshi Quoumxikko Quathuglai Chaicher
Tolnoul Moxperpan Plercel Zapoldon Shisshis Nekom Plyshafy Chochona Thythy Xogys Lytglulvex Plaim Nekglobrim
Hivisvis Tan Drorveljor Pucixbo Shanxor Somtrurpox Wux Xyrcax Vylvyl Chikplel Poukquoxpi Thoxtat Trontronbol
Bratbratbrat Stoglou Sirthikthik Fes Paiwuxthot Xous Thak Nornornor Quanazai Thevar Thaixgissta Tir Waxo
Traikgygy Brusbrukbruk Plaikham Fys Calthaiplix Plurxilou Chomchom Dyr Ful Glaix Houldes Drurdraik Bemka
Catglairge Xepuk Sto Plimfit Jik Trisquekji Bimkrix Zytstaixri Jain Gomymymy Stexchan Fail Milroulsta Xexe
Bexbexfas Gut Puhet Braibraibrai Caicakrel Soumhoksta Shosxekplet Xilol Bait Gesdranxo Chouk Nemsa Glurvil
Tryrteszin Jourbrinai Kigil Stixche Var Thousthousjo Rai Hax Vulbo Jer Simquok Quu Shilinlin Dildil Plyt
Tykquousha Chaimem Baxcilchi Cilwar Dumthembik Rymmushaim Chiryre Vys Jysmik Quexquexplyt Mouk Kroum Mymymy
Doxkrixkrix Vas Zon Waivouxshu Gakgakgak Sterwizol Trou Gla Gyn Bacumchi Tolshotdain Volvovovo Jitsy Rutkrit
Wonwon Glirgosplyl Rylkaitgit Wothynhix Plylchesol Brascha Traisxamce Lyquar Stex Thufe Hukbraindrer Raplel
Zaindri Hoquour Foun Glenwaldas Votsinkren Jerjer Thunkril Nyrrirsten Nypletce Chomduxshain Wot Birwetwet
Gaik Plegi Fitfitde Jekkrekmuk Geshou Dysborrim Shutrer Sery Dro Thol Guhosstir Jeje Thogysre Thon
Choutoulfil Nekmut Camcamcam Drapo Kraplolwai Xaitquyn Dristhiglix Xus Wosthet Tox Vastanpan Fuskrinbo
Planlor Zytlamlam Fix Jikpexhe Stouber Ravyl Trymnyl Zinchum Firkrutkrut Glezurpun Shepothel Plaimkram Cus
Vyxequyr Wewou Poux Quefoham Zaixdro Xelxelche Culwyx Chychychy Hucykplet Qui Wos Cerxorek Sisvelthour
Syplet Lomlom Quoxbribrax Dres Traikbrou Woun Jai Charas Brax Fymfym Trychir Cuxcuxshi Got Glintomloun Plu
Kulchysham Cysaibre Jax Dredysdry Vymthou Dra Met Plaixvan Dredretyx Stemfamquon Plomlou Dadada Vafan
Thouxsacex Xavelvelvel Domtrairples Chaikpaco Testestes Gailgailpli Rou Moxnolfu Hou Ston Faimenik Waktas
Draxdraxdrax Zeradro Lyrom Councoun Ler Hol Gydotdot Thou Gunstek Krelkrel Zor Krerkoum Thoutcukka Wouxhes
Char Foukze Chimchim Dundun Vanbom Pegloustyr Shimplallan Bympli Bol Jolkral Ches Glouglouplin Tinplelquux
Plaldrashik Raimrosux Traisxy Quitven Bouquakkrou Vak Chaxchax Shyrkar Choux Storbou Doumirplen Fohi
Joxunxou Vaixal Chilchilchil Pylwe Drettritmol Stairglemex Palstam Nemnemnem Gelwam Xynxyn Jaxvypou Troujan
Dryl Thalthe Goukbromvo Jukstat Kaik Chal Gysmin Kitkitkat Rouroulix Brambrair Lala Zesthes Karkarkar
Hidoutgun Kotshunwouk Box Stelrul Mylshon Tex Plonjatgom Bupul Trutglel Lal Per Jigetrer Plain Citkrit
Drisgo Xasxasgat Rusvubis Makwijil Pomnelji Hom Quail Lylyly Trouxrair Vourkairkrex Gykfosthun Firpaittrak
Bur Gloukron Xarbrer Shokshok Her Gendesdes Sekmin Recudrym Thaim Fertrarlir Kimbrymlou Lodexda Tromxorbrai
Cour Chatje Chokstustho Krixdamthaim Ziscyr Stisti Tairquurzox Glyquounrun Rainudrix Gli Pligikthim
Lirhekglail Piwulque Ribrex Kotus Visne Wakstot Bimhem Drukquin Zan Stakchek Nyny Plamplammir Storplahot
Zilfitjous Quultum Vin Plaix Maijemplis Jyx Draisplu Glarnokze Goun Krexbaitzir Stou Fuknolxir Tairplel
Dorirzair Plixdex Kuquaquaqua Tra Nounhykhyk Ritkrarwu Pyndromsti Jemchix Fekfon Cothokglek Xisxonsai Zet
Bru Xashe Dou Kico Stostyn Losfaik Choshexxe Chas The Rysrysrys Sit Leldrasrel Mum Glifelhin Krinkrinkrin
Qualwai Fesfes Wujun Krou Thidil Mikumkum Lissterster Sososo Dikry Chywit Mul Wurwuxglouk Stalvaikmouk Kin
Kim Zailglabek Tre Parkys Shidol Mingo Zos Bel Saxrounex Fojylsair Plaitaquuk Krixdux Brendrinchum Glalbruk
Kaglistrain Drexdrexdrex Wewewedix Gistrax Brebrebre Naim Glaikathou Quaiszais Kem Gaifukwas Nini Masglai
Fyl Vovovobrir Chilpaxbre Stojatar Shaispoun Lexplarxour Plischetou Cherdaikgen Krouk Broukru Lon Semwuca
Detchysrou Quemquem Waha Plisplibyr Rexgi Sadux Bam Try Drys Xos Plakpam Stulstuldyn Sytstithim Trakhouktre
Choushor Zaiquaishai Nur Jounhaijou Bexstarwe Wykchylzait Brailzutur Shosshos Stupy Xain Kraskraskras
Krairnos Ban Tror Huskon Paik Somdroum Katkounou Vusvus Quichyl Norjarglom Houxnal Vecirshos Stexquo Wirfafa
Thawo Toumtri Piknux Ritrit Wawawa Wardytkro Kroulgisplot Mumhykhyk Hathehe Stek Quardut Thasa Brobro Draiha
Dremzos Fomgaimgaim Zis Caica Drourtrexmat Quek Fikgy Zembrouvo Taik Mymyshin Plyxchai Chaiboscol Cuspitvy
Chaigalgal Nilte Bunbunkak Mailtryxhe Vur Womcix Wan Wis Wospypla Bourbourbour Xytchai Quakeltrex Kraxlyja
Lusthomzok Kransa Lunlunkouk Sher Glailtritgi Daxget Viknos Bratnos Fengomgom Loun Hougle Bribri Tun Bro
Sous Lilxir Gloumshosho Kru Lakquuxvok Sux Chixchix Molpusxou Pouxtradu Sesses Velplisgi Dran Drysaislul
Kremdrusple Ratgit Xutkomshas Stixemkry Jathochal Belbelren Stancoustuk Kretki Zarmuxtres Glesby
Charcharchar Rokboulfok Sil Pylcux Kymthasco Jejax Gexwai Paba Trir Laimlaimlaim Bucoulshain Nishenkar
Kruldraizo Fenjouk Wait Damdam Wuwuwu Boktapar Mirhouta Drux Nonstan Cokry Brybry Glatdaisglou Katglak
Bestottren Glouzem Brous Kykde Tro Lusdiro Coucoucou Zouzouzousu Trobrokjouk Jaijaibro Gaigaigaice
Varxoutxout Xotcoutbon Faxtrem Tivouxves Gaitchur Daistax Dradystro Kryxdrik Shonmexvou Shegleglegle
Xougacis Tat Mem Vytcel Bramchounxex Brylgai Potkulbrus Foglamlu Draimlas Kouk Dymglekrar Nasten Taim Kaksti
Laxkekjax Kelponther Dryn Byl Catwesgak Vol Fasnokjix Quevesix Quem Wouxdrozoux Wajasdrex Vinwalwal Gaxrox
Kirgy Dakna Krouxsimmi Stim Gurgujyk Ploshirkru Mexzu Paimranjyr Pempourbran Glisfik Det Rokcanjour
Vukditshous Bropiset Rasglistot Pyquim Calikca Routroutmu Datdatstul Kraixfe Plaxam Quomdysthik Boksotches
Thastoljys Thachoun Shimtaimplok Naik Wottre Dounicou Dritmibour Xek Zailzail Krima Plelwoukjar Quim
Glemchoun Goul Zailzailzail Fylnabun Brosbroslon Wonpon Fir Chesly Nar Jir Sir Xyxpluldai Milwobrat
Jesjesquox Kousvetdaim Thonditple Vochi Kiksim Wonjutum Dryrbromplex Kreksai Tak Cox Roultykvu Nitjair Poxik
Derkra Jococo Raidrilthux Glalkekquyk Dolek Lurgaisglek Dratginbran Keke Zukwy Glasesboun Wex Suglaix
Jaithyrxa Catcatdaix Quunmendoul Trous Brulquusda Roun Jirrysjim Pytthyn Drultit Nel Houren Quynquynquyn
Jiljiljil Hosdetxi Xemshasher Xixixigex Shanshan Bin Quou Zoljakglo Ven Jourquolsta Thyzeze Shaxninjom Pot
Nosisvym Braik Chorbrelbrel Vis Kaitchonut Myk Sel Quus Bolzoxpa Syk Mitmitglu Gisdutdre Trouvakkrous
Moutwex Houswaikys Shex Gergerlol Vul Xoxglat Trukgemgem Shoubrainchi Wikgair Glil Vinvinvinfou Nousnousnous
Daistal Braxwal Zulcikgou Thatzail Stun Farquaxgli Him Voxvox Houtlous Sexcingol Mimbrat Jot Dittrerlam
Betquykche Trok Pinpun Wilrouxjo Bomtoufel Quuquu Plaistensa Viviviglat Bouwixrer Trenplyxfu Kyt Jemworsy
Touksho Trouhomdru Drik Tototo Chulcaix Dar Truktruk Lyslystrair Thokrom Bekthout Drarzex Glezaitnyr
Trolmuxson Trottrot Hothus Bramwe Bralrounthas Bum Chacha Waquomquom Thuthuthu Fynmama Tem Lox Thaxshair
Braicok Trimtrimthyx Krounkroun Stalstyki Wil Gly Thetcheje Stekquus Xairxairtos Noumfupur Catjar Fais
Patmathes Taitaitai Drexjedu Caibou Thi Waichirzun Pluguxcait Quambryn Wynsha Nyxvem Siksik Tetrais Xennak
Litouwek Cecha Xagou Quukmi Mol Pail Tholthol Loulxer Gepuspe Fisvalto Berxa Nuplumshax Kroulkrou Breltalhyl
Glyswidro Deschetcur Brerbrer Higuxym Las Troparo Qua Trikrin Sekchomvot Drehou Letletlet Delron Tour Jex
Noxnoxnoxbex Drunxaisplyt Nenemxoul Xujy Sox Gliksiquok Chyquunin Vai Livisvyr Jakhothak Cokyt Quaxstensim
Kil Mel Stensten Mik Sawoul Wukroushyt Saiskylton Trol Nunrafin Glaxvul Dryxdryx Xurxur Hebret Xoupler
Volvirvirvir Bruxmokdror Fipurgem Boulboul Brakbairyn Fordrait Quapixpix Voul Pustytmam Nivoglut
Noumdrerdrer Tircul Krerkrer Lidromwat Loulouplyl Wemtharxair Jem Futfut Thuvynbut Thamfe Quetom Tikglugis
Pla Shomshom Quunquas Naknakdai Krenatnat Xorthur Gelitxar Pipihy Sisi Brokbrokfol Quaizex Tyttytbo Codrezou
Xomthix Bairukbril Katgis Naitmalkrai Drountrestem Krurbim Goulrou Xokple Drygojo Houm Boutwenplit
Brarminmin Pitchis Kram Xekzo Rom Stoumochai Drexdrex Cakhimxa Felqua Visvis Saglat Vokhegla Zirdrom Bomkot
Carailshi Legleglix Zotdou Wimbo Net Bat Zem Sheksheksur Son Bra Cadomplyr Styzetran Shexkiker Fikfoully
Stitploul Cetkrairmik Tar Thaiboubou Gloukglouk Kintry Kukuku Cimxaix Jashorglam Gykdrek Trocator Dron
Remglikco Toul Fufufu Bixbixbixbo Zol Sibelstin Miksol Cou Tratdous Pler Daxtuk Reklym Quasholbroul
Meplulkry Brixtol Kom Lircozi Mekdi Falglairtrym Kaitbi Momoplax Rarquat Stinshatte Sazexpul Perkarhok
Krarwalbris Chax Gofajis Quoquoquo Wourxam Gotairdrun Jen Trul Farga Quer Gakselglas Brimvos Gatraithon
Cylnymquir Pokdesak Cymwinglour Mommom Cel Sonboupli Quytrertrer Chetren Stastacim Pitkrorfai Fekaix Hihi
Kichitdryt Henster Jemjemplo Plorshisthi Trekrexsoul Natchudroul Kilar Branthytje Thisha Dox Hixcin Rem
Disloumdix Higai Brousny Bistemglur Krouplyk Nestyr Thenakthit Bouk Trakstik Xylkilkilkil Gongon Quuzair
Kroustelget Trurglolma Baifimglais Krai Vospe Kymjouchim Dritdrit Nimzax Pat Nyle Staitstait Byrfompis Fyr
Fomfommair Dryxvajas Houk Naiwyvim Bras Rel Krokkrokchin Glaze Querdrun Thainenglir Gynno Dutou Tholdrairpol
Vaxgi Thatloldek Treplix Sostol Horsta Thyk Trixlax Rokzax Litrair Xoumsto Drimcaxjo Falbrine Xin Bilshouk
Shylvyt Thandoul Roukroukrouk Dimtroum Glulquat Fasetset Mirosros Tranrekshor Biksasqua Wor Letnuvoul
Lyllyllyl Kraidair Licel Stumdout Dridri Tronrot Sterbo Wasvonvonvon Xethoxxu Kout Tetete Glaishin Querkyr
Droutwix Lylylyshoux Dremcit Lalala Glotplan Drethin Cait Poutplaiho Cixcix Pakwuk Jeryxyk Mixbro
Vedrainmoum Hittrekxis Thoux Rezir Pynuwe Vawi Mormorrak Haiquoul Jiskrex Hympan Tos Chokte Satkanha Kibri
Zaimximcais Dam Tou Broulmai Xaiquel Chetvaldren Sorturcux Xosglais Faix Jaiberplyk Haimtek Couzon Tostos
Brikbrik Laina Shouhigai Bainail Stastastahi Linlin Sosche Brunxoumkrou Finrukruk Bikbeva Troudrekquat Myl
Rulrul Furzekxe Jynzoustryr Nunkouk Touxkoncho Shotelthax Hokru Nabis Quox Dousglaglat Hosglas Shun Cher
Difoutryx Rikchonchon Zimgexshout Thuquo Ripe Cerosbo Bairrerhair Chokna Pilles Fofovu Shes Natco Xysxys
Disdis Shet Rainwan Raibije Brol Touxrove Vaik Gloux Bobo Troscho Xenervox Par Denoun Jos Quesglokta
Kekkekkek Chajelhix Shutget Shouris Pysle Tutgogogo Diwet Drokdrok Nekrofen Kan Dan Pompu Stam Chyfatplul
Pex Traplo
""")
"""Last names the documents' contacts are drawn from."""

DEMO_NOUNS = DemoNouns(cities=_CITIES, topics=_TOPICS, first_names=_FIRST_NAMES, last_names=_LAST_NAMES)
"""The bundled model's training world's nouns (`TRAIN_ENTITIES`)."""
